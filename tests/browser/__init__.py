"""Real-browser tests (Playwright + Chromium) against a running profscope server."""
