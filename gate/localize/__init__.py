"""``gate localize``: which decoder layers carry a build's loss, and the repaired build (docs/localize.md)."""
