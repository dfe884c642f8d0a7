"""The Docker engine through the docker SDK: which engine (``endpoint``), which client
builds (``host``), one throwaway container (``container``), registries (``registry``), and
what a killed run left (``run_label``).

Edge: (all)
"""
