"""Stage 6: what ranks leave behind when they fail: hang dumps and out-of-memory dumps."""
