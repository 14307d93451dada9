"""The farm model both host and VM planning use: vGPUs placed on GPUs (`placement`) and VMs across a farm in
power-on order (`state`), SR-IOV virtual functions and passthrough NICs as capacity (`nics`), and the hosts as
they will be after planned host changes (`predict`). Pure: no I/O."""
