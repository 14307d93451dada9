"""Kubernetes on vSphere: the VM-class stage (stage.py) and manifests rendered for GPU VM classes (render.py)."""
