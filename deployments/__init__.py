"""Deployments as data: a typed catalogue of flows and one way to serve them."""
