"""The turn loop and what it calls: intake, prompt, controls."""
