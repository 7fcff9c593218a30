"""SelfMind core: the platform-free turn loop, memory store, recall, reflection and streaming."""
