"""Admission: is a pod's or Job's topology request admissible in this cluster, before it queues.

``summary``: what the NodeTopology objects offer, as one cluster-scoped ``NodeTopologySummary``;
``controller``: keeps it current from a watch; ``rules``: the admission rules offline (``nodetopo
admit``), the same rules and messages as the ValidatingAdmissionPolicies in ``deploy/admission/``;
``claims``: the same feasibility rules for DRA ResourceClaims and ResourceClaimTemplates.
"""
