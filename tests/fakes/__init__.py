"""Local stand-ins for the platforms SelfMind talks to, served over real sockets."""
