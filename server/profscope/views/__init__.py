"""One module per page; ``registry.VIEWS`` lists them. See docs/ARCHITECTURE.md, "How to add a view"."""
