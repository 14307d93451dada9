package vc

import (
	"errors"
	"fmt"

	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/types"

	"gpusim/internal/farm"
	"gpusim/internal/fault"
)

// What VirtualMachine's RelocateVM_Task and MigrateVM_Task check and do (virtual_machine.go): a running VM's
// vGPUs and NICs on the destination host.

// HotMigrateOption is the vCenter advanced setting that allows vMotion of running vGPU VMs.
const HotMigrateOption = "vgpu.hotmigrate.enabled"

// staysOnItsHost refuses to move a running VM to another host when it has an SR-IOV adapter or a DirectPath I/O
// device (a PCI passthrough device that is not a vGPU), as vCenter does (vSphere Networking, "SR-IOV Support:
// Availability of Features": no vMotion; "DirectPath I/O": cannot migrate across hosts; the rule's data is
// vgpuctl/data/network.yaml, vmotion). A PVRDMA adapter moves.
func (s *Sim) staysOnItsHost(vm *simulator.VirtualMachine, dest *types.ManagedObjectReference) types.BaseMethodFault {
	to, from := s.hostOf(dest), s.hostOf(vm.Runtime.Host)
	if to == "" || to == from || vm.Runtime.PowerState != types.VirtualMachinePowerStatePoweredOn {
		return nil
	}
	for _, d := range vm.Config.Hardware.Device {
		what := ""
		switch d.(type) {
		case *types.VirtualSriovEthernetCard:
			what = "an SR-IOV network adapter"
		case *types.VirtualPCIPassthrough:
			if _, vgpu := vgpuProfile(d); !vgpu {
				what = "a DirectPath I/O device"
			}
		}
		if what != "" {
			label := d.GetVirtualDevice().DeviceInfo
			name := fmt.Sprintf("device %d", d.GetVirtualDevice().Key)
			if label != nil && label.GetDescription().Label != "" {
				name = label.GetDescription().Label
			}
			msg := fmt.Sprintf("The virtual machine %s cannot be migrated while powered on: it has %s (%s)", vm.Name, what, name)
			return s.messages.With(fault.DisallowedMigrationDeviceAttached(what), msg)
		}
	}
	return nil
}

// moveVGPUs admits a running vGPU VM's vGPUs on the destination host and releases them on the source;
// it reports whether anything moved.
func (s *Sim) moveVGPUs(ctx *simulator.Context, vm *simulator.VirtualMachine, dest *types.ManagedObjectReference) (bool, types.BaseMethodFault) {
	profiles := vgpuProfiles(vm.Config.Hardware.Device)
	to, from := s.hostOf(dest), s.hostOf(vm.Runtime.Host)
	if len(profiles) == 0 || to == "" || to == from || vm.Runtime.PowerState != types.VirtualMachinePowerStatePoweredOn {
		return false, nil
	}
	if !s.hotMigrateEnabled(ctx) {
		msg := fmt.Sprintf("vGPU VM %s cannot be migrated while powered on: %s is not true", vm.Name, HotMigrateOption)
		return false, s.messages.With(fault.MigrationDisabled(), msg)
	}
	s.Farm.Release(vm.Self.Value)
	req := farm.Request{Profiles: profiles, NVLink: wantsNVLink(vm.Config)}
	if _, err := s.Farm.Admit(to, vm.Self.Value, vm.Name, req); err != nil {
		s.readmit(from, vm)
		if errors.Is(err, farm.ErrInsufficient) {
			return false, s.messages.With(fault.InsufficientGraphics(), farm.InsufficientGraphics+" (on "+to+")")
		}
		if f := s.guestDriverFault(err); f != nil { // software.go
			return false, f
		}
		return false, s.messages.With(fault.InvalidState(), err.Error())
	}
	return true, nil
}

// moveHostVMList moves the VM from the source host's `vm` list to the destination's (vcsim's own
// RelocateVM only changes the VM's runtime.host).
func (s *Sim) moveHostVMList(ctx *simulator.Context, vm types.ManagedObjectReference, from, to *types.ManagedObjectReference) {
	if from == nil || to == nil || *from == *to {
		return
	}
	if src, ok := ctx.Map.Get(*from).(*simulator.HostSystem); ok {
		ctx.Map.RemoveReference(ctx, src, &src.Vm, vm)
	}
	if dst, ok := ctx.Map.Get(*to).(*simulator.HostSystem); ok {
		ctx.Map.AppendReference(ctx, dst, &dst.Vm, vm)
	}
}

// moveBack returns a VM's vGPUs to the host it is still on after a failed relocation.
func (s *Sim) moveBack(vm *simulator.VirtualMachine) {
	s.Farm.Release(vm.Self.Value)
	s.readmit(s.hostOf(vm.Runtime.Host), vm)
}

func (s *Sim) readmit(host string, vm *simulator.VirtualMachine) {
	req := farm.Request{Profiles: vgpuProfiles(vm.Config.Hardware.Device), NVLink: wantsNVLink(vm.Config)}
	if _, err := s.Farm.Admit(host, vm.Self.Value, vm.Name, req); err != nil {
		fmt.Printf("gpusim: %s: could not give its vGPUs back on %s: %v\n", vm.Name, host, err)
	}
}

// hotMigrateEnabled reads vCenter's advanced setting (absent: false, as in vCenter).
func (s *Sim) hotMigrateEnabled(ctx *simulator.Context) bool {
	for _, o := range ctx.Map.OptionManager().Setting {
		if v := o.GetOptionValue(); v.Key == HotMigrateOption {
			switch val := v.Value.(type) {
			case bool:
				return val
			case string:
				return val == "true" || val == "True" || val == "1"
			}
		}
	}
	return false
}
