"""Native request <-> the chain's view, per surface: chat completions, Responses, Messages (docs/surfaces.md)."""
