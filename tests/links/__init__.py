"""Links (shovels) between real broker processes."""
