"""The doors to the outside systems (docs/architecture.md): nothing here decides, nothing imports
read, plan or apply."""
