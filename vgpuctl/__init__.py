"""vgpuctl: infrastructure as code for NVIDIA vGPU on VMware vSphere."""

__version__ = "0.1.0"
