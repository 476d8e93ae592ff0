"""The HTTP edge, the only starlette/uvicorn user: app, edge, guard, body, reload."""
