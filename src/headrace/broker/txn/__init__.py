"""The transaction coordinator and its log."""
