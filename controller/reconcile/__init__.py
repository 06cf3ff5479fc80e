"""Reconcilers: observe through the Cluster port, decide with the core, act through the port."""
