"""`python -m guard.generate.policies write|check` (see guard/generate/policies/__init__.py)."""

from __future__ import annotations

from guard.generate import file_commands
from guard.generate.policies import POLICY_DIR, render
from guard.settings import Settings

main = file_commands("guard/generate/policies", POLICY_DIR, lambda: render(Settings()), True)

if __name__ == "__main__":
    main()
