"""Delivery checks on the command line: ``nodetopo expect`` (what a placement should deliver) and
``nodetopo accept`` (the verdict on an nccl-tests or nvbandwidth result). The model and the verdict
are ``nodetopo.expect``; this package reads files, flags and prints.
"""
