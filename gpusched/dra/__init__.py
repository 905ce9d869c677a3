"""DRA allocation library: CEL device selectors and structured allocation (issue 13)."""
