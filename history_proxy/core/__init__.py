"""Pure request model, no I/O: messages, validation, tokens, encodings, identity."""
