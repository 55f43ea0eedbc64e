"""Data plumbing: shipped and downloaded assets, table files, haystack text. May import: core."""
