"""nodetopo's one Kubernetes client: every command that talks to the API server goes through here.

* ``flags``: ``--kubeconfig`` / ``--context``, the same on every command (``argparse`` only);
* ``config``: THE loader (``cluster_access``): the in-cluster service account or a kubeconfig,
  as a ``ClusterAccess``;
* ``exec``: exec credential plugins (``aws eks get-token``, ``gke-gcloud-auth-plugin``, ``kubelogin``);
* ``transport``: ``KubeConnection`` (HTTP/TLS with the standard library, timeouts, an HTTP CONNECT
  proxy, token rotation, the rate limit) and ``connect``;
* ``pacing``: ``TokenBucket`` (the transport's rate limit) and ``Backoff``;
* ``errors``: the client's failures and ``translate_api_error`` (HTTP / no answer → the
  ``nodetopo.errors`` hierarchy);
* ``session``: ``ApiSession``, the few calls nodetopo makes, dicts in and out;
* ``reflector``: ``Reflector`` (list + watch + relist), the one cache feed of the consumers;
* ``official``: ``load_api_client``, the official ``kubernetes`` client configured by the same
  loader: the only module that imports it, and no command uses it (docs/architecture.md).

Importing the package loads none of its modules: ``nodetopo probe`` (every GPU pod) pays only for
what it uses. Import from the modules themselves.
"""
