"""The config file: models, policies (the filter union), summaries settings, loading."""
