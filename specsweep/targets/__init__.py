"""Where servers run. v1 has the local machine; SSH hosts come next."""
