"""Protocol fronts' session rules as plain objects (DESIGN.md section 11): no trio, no sockets, no SQL."""
