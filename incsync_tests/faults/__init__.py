"""incsync's own fault suite: killed processes, killed connections, and the SIGKILL soak (``make test-faults``)."""
