"""Model and tokenizer loading (local folders, hub ids, built-in aliases)."""
