"""Admin HTTP API and CLI against a real broker process."""
