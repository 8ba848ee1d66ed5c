"""The Xid tables live in guard.xid_tables (the guard's data as much as the evidence Job's); this
name stays only for the imports that still use it."""

from guard.xid_tables import load_catalog as load_catalog
