package vc

import (
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"

	"gpusim/internal/farm"
	"gpusim/internal/fault"
)

// The vGPU rules VirtualMachine and Folder apply: a VM's vGPU devices, reconfigure checks, admission at power-on,
// and what a clone keeps.

// vgpuProfile returns the profile of a vGPU device, or ok=false for other devices.
func vgpuProfile(d types.BaseVirtualDevice) (string, bool) {
	p, ok := d.(*types.VirtualPCIPassthrough)
	if !ok {
		return "", false
	}
	b, ok := p.Backing.(*types.VirtualPCIPassthroughVmiopBackingInfo)
	if !ok {
		return "", false
	}
	return b.Vgpu, true
}

// vgpuProfiles lists the vGPU profiles in a device list, in device order.
func vgpuProfiles(devices []types.BaseVirtualDevice) []string {
	var out []string
	for _, d := range devices {
		if p, ok := vgpuProfile(d); ok {
			out = append(out, p)
		}
	}
	return out
}

// wantsNVLink reports whether a VM's vGPUs form an NVLink device group.
func wantsNVLink(cfg *types.VirtualMachineConfigInfo) bool {
	if cfg == nil {
		return false
	}
	if cfg.DeviceGroups != nil && len(cfg.DeviceGroups.DeviceGroup) > 0 {
		return true
	}
	for _, d := range cfg.Hardware.Device {
		if _, ok := vgpuProfile(d); ok && d.GetVirtualDevice().DeviceGroupInfo != nil {
			return true
		}
	}
	return false
}

// vgpuPlan is the vGPU list a device change produces.
type vgpuPlan struct {
	profiles []string
	changed  bool
	index    int // device change index of the first vGPU change
}

func planVGPUs(current []types.BaseVirtualDevice, changes []types.BaseVirtualDeviceConfigSpec) vgpuPlan {
	byKey := map[int32]string{}
	var order []int32
	for _, d := range current {
		if p, ok := vgpuProfile(d); ok {
			k := d.GetVirtualDevice().Key
			byKey[k] = p
			order = append(order, k)
		}
	}
	plan := vgpuPlan{index: -1}
	for i, c := range changes {
		spec := c.GetVirtualDeviceConfigSpec()
		if spec.Device == nil {
			continue
		}
		p, isVGPU := vgpuProfile(spec.Device)
		key := spec.Device.GetVirtualDevice().Key
		_, wasVGPU := byKey[key]
		if !isVGPU && !(wasVGPU && spec.Operation == types.VirtualDeviceConfigSpecOperationRemove) {
			continue
		}
		if plan.index < 0 {
			plan.index = i
		}
		plan.changed = true
		switch spec.Operation {
		case types.VirtualDeviceConfigSpecOperationAdd:
			byKey[key] = p
			order = append(order, key)
		case types.VirtualDeviceConfigSpecOperationRemove:
			delete(byKey, key)
		case types.VirtualDeviceConfigSpecOperationEdit:
			if wasVGPU {
				byKey[key] = p
			}
		}
	}
	for _, k := range order {
		if p, ok := byKey[k]; ok {
			plan.profiles = append(plan.profiles, p)
			delete(byKey, k)
		}
	}
	return plan
}

// checkVGPUs applies the reconfigure rules: power state, per-VM limit, profile offered by the host.
func (s *Sim) checkVGPUs(host string, powerState types.VirtualMachinePowerState, plan vgpuPlan) types.BaseMethodFault {
	if !plan.changed {
		return nil
	}
	if powerState != types.VirtualMachinePowerStatePoweredOff {
		return s.messages.With(fault.DeviceHotPlugNotSupported(plan.index), "vGPU devices can only be added or removed while the virtual machine is powered off.")
	}
	if limit := MaxVGPUsPerVM(s.Spec.APIVersion); len(plan.profiles) > limit {
		return s.messages.With(fault.TooManyDevices(),
			fmt.Sprintf("The virtual machine would have %d vGPU devices; vSphere %s supports at most %d per virtual machine.",
				len(plan.profiles), versionOf(s.Spec.APIVersion), limit))
	}
	var offered map[string]bool
	if host != "" {
		info, err := s.Farm.Host(host)
		if err == nil {
			offered = map[string]bool{}
			for _, g := range info.GPUs {
				for _, p := range g.Profiles {
					offered[p] = true
				}
			}
		}
	}
	var first farm.Profile
	for i, name := range plan.profiles {
		invalid := func(msg string) types.BaseMethodFault {
			return s.messages.With(fault.InvalidDeviceSpec(plan.index), msg)
		}
		if name == "" {
			return invalid("The vGPU profile of a PCI passthrough device is empty.")
		}
		p, err := s.Farm.Catalog().Profile(name)
		if offered != nil && !offered[name] {
			return invalid(fmt.Sprintf("The vGPU profile '%s' is not supported by any GPU of host %s in its current mode.", name, host))
		}
		if err != nil {
			if offered != nil {
				continue // the host offers a profile the catalogue does not explain: the host is the authority
			}
			return invalid(err.Error())
		}
		if i == 0 || first.Name == "" {
			first = p
		} else if p.Board != first.Board || p.Series != first.Series {
			return invalid(fmt.Sprintf("vGPU profiles of one virtual machine must share board and series: %s and %s.", first.Name, name))
		}
	}
	return nil
}

// waitBody waits for the task a simulator method body returned and returns its fault.
func (s *Sim) waitBody(body soap.HasFault) (types.ManagedObjectReference, types.BaseMethodFault) {
	var none types.ManagedObjectReference
	if f := body.Fault(); f != nil {
		if vf, ok := f.VimFault().(types.BaseMethodFault); ok {
			return none, vf
		}
		return none, fault.SystemError(f.String)
	}
	res := reflect.ValueOf(body).Elem().FieldByName("Res")
	if !res.IsValid() || res.IsNil() {
		return none, nil
	}
	rv := res.Elem().FieldByName("Returnval")
	ref, ok := rv.Interface().(types.ManagedObjectReference)
	if !ok {
		return none, nil
	}
	task, ok := s.ctx.Map.Get(ref).(*simulator.Task)
	if !ok {
		return none, nil
	}
	task.Wait()
	if task.Info.Error != nil {
		return none, task.Info.Error.Fault
	}
	if r, ok := task.Info.Result.(types.ManagedObjectReference); ok {
		return r, nil
	}
	return none, nil
}

// changeVersionFault refuses a reconfigure whose spec names a changeVersion other than the VM's, as vCenter does:
// "If specified, the changes are only applied if the current changeVersion matches the specified
// changeVersion" (vSphere Web Services API, VirtualMachineConfigSpec.changeVersion), with the fault
// ReconfigVM_Task lists for an operation that "fails because another operation has modified the
// datastructure" (vim.fault.ConcurrentAccess). vcsim's configure gives every successful reconfigure a new
// changeVersion.
func (s *Sim) changeVersionFault(vm *simulator.VirtualMachine, want string) types.BaseMethodFault {
	if want == "" || vm.Config == nil || want == vm.Config.ChangeVersion {
		return nil
	}
	return s.messages.With(fault.ConcurrentAccess(), fmt.Sprintf(
		"The virtual machine %s was changed by another operation: its changeVersion is %s, the request expected %s.",
		vm.Name, vm.Config.ChangeVersion, want))
}

// memoryFault checks that a vGPU VM reserves all of its memory.
func (s *Sim) memoryFault(cfg *types.VirtualMachineConfigInfo) types.BaseMethodFault {
	if cfg.MemoryReservationLockedToMax != nil && *cfg.MemoryReservationLockedToMax {
		return nil
	}
	mem := int64(cfg.Hardware.MemoryMB)
	if a := cfg.MemoryAllocation; a != nil && a.Reservation != nil && *a.Reservation >= mem {
		return nil
	}
	msg := fmt.Sprintf("Invalid memory setting: memory reservation (sched.mem.min) should be equal to memsize(%d).", mem)
	return s.messages.With(fault.GenericVMConfig(msg), msg)
}

// admit places a VM's vGPUs at power-on, then takes its SR-IOV VFs and passthrough NICs (network.go); all or
// nothing.
func (s *Sim) admit(vm *simulator.VirtualMachine) types.BaseMethodFault {
	if f := s.admitVGPUs(vm); f != nil {
		return f
	}
	if f := s.admitNICs(vm); f != nil {
		s.Farm.Release(vm.Self.Value)
		return f
	}
	return nil
}

// admitVGPUs places a VM's vGPUs at power-on.
func (s *Sim) admitVGPUs(vm *simulator.VirtualMachine) types.BaseMethodFault {
	profiles := vgpuProfiles(vm.Config.Hardware.Device)
	if len(profiles) == 0 {
		return nil
	}
	if f := s.memoryFault(vm.Config); f != nil {
		return f
	}
	host := s.hostOf(vm.Runtime.Host)
	_, err := s.Farm.Admit(host, vm.Self.Value, vm.Name, farm.Request{Profiles: profiles, NVLink: wantsNVLink(vm.Config)})
	switch {
	case err == nil:
		return nil
	case errors.Is(err, farm.ErrInsufficient):
		return s.messages.With(fault.InsufficientGraphics(), farm.InsufficientGraphics)
	case errors.Is(err, farm.ErrGuestDriver):
		return s.guestDriverFault(err) // software.go
	default:
		return s.messages.With(fault.InvalidState(), err.Error())
	}
}

// copySettings carries the settings vcsim's clone drops from the source and the clone spec.
func (s *Sim) copySettings(ctx *simulator.Context, src, clone *simulator.VirtualMachine, cfg *types.VirtualMachineConfigSpec) types.BaseMethodFault {
	spec := types.VirtualMachineConfigSpec{
		Firmware:                     src.Config.Firmware,
		MemoryReservationLockedToMax: src.Config.MemoryReservationLockedToMax,
		MemoryAllocation:             src.Config.MemoryAllocation,
	}
	for _, o := range src.Config.ExtraConfig {
		if v := o.GetOptionValue(); !strings.HasPrefix(v.Key, "govcsim") && !strings.HasPrefix(v.Key, "RUN.") {
			spec.ExtraConfig = append(spec.ExtraConfig, &types.OptionValue{Key: v.Key, Value: v.Value})
		}
	}
	groups := src.Config.DeviceGroups
	if cfg != nil {
		if cfg.Firmware != "" {
			spec.Firmware = cfg.Firmware
		}
		if cfg.MemoryReservationLockedToMax != nil {
			spec.MemoryReservationLockedToMax = cfg.MemoryReservationLockedToMax
		}
		if cfg.MemoryAllocation != nil {
			spec.MemoryAllocation = cfg.MemoryAllocation
		}
		spec.ExtraConfig = append(spec.ExtraConfig, cfg.ExtraConfig...)
		if cfg.DeviceGroups != nil {
			groups = cfg.DeviceGroups
		}
	}
	if _, f := s.waitBody(clone.ReconfigVMTask(ctx, &types.ReconfigVM_Task{This: clone.Self, Spec: spec})); f != nil {
		return f
	}
	if groups != nil {
		g := *groups
		ctx.Map.Update(ctx, clone, []types.PropertyChange{{Name: "config.deviceGroups", Val: &g}})
	}
	return nil
}
