"""The only HTTP-client user: routing, retries, fallbacks, header hygiene, HTTP/1.1 transport."""
