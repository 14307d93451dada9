package farm

import (
	"fmt"
	"slices"
)

// GPU properties the ESXi shell sets with nvidia-smi. Each is an on/off mode with the value in effect and the
// value after the next reboot, and a rule for when a change takes effect. A new property is a pair of fields in
// GPUState and one entry in gpuProperties: the snapshot (GPUInfo embeds GPUState), SetGPU, reboots, reboot
// faults and a new host's start value follow from them.

// GPUProperty names a settable GPU property; it is also the Event.What of its changes and the name a reboot
// fault's Ignore uses for it.
type GPUProperty string

// The GPU properties.
const (
	GPUPropMIG GPUProperty = "mig" // MIG mode (nvidia-smi -mig)
	GPUPropECC GPUProperty = "ecc" // ECC memory (nvidia-smi -e)
)

// GPUState is the settable state of a GPU: per property, the mode in effect and the mode after the next reboot
// (equal when nothing is pending).
type GPUState struct {
	MIGCurrent bool `json:"migCurrent"`
	MIGPending bool `json:"migPending"`
	ECCCurrent bool `json:"eccCurrent"` // ECC memory in effect
	ECCPending bool `json:"eccPending"` // ECC memory after the next reboot
}

// GPUSetting is one requested value of one GPU property (nvidia-smi -i 0 -mig 1: GPUPropMIG, on).
type GPUSetting struct {
	Property GPUProperty
	On       bool
}

// Outcome says when a GPU setting takes effect.
type Outcome int

const (
	// Applied: the mode is in effect now (or already was).
	Applied Outcome = iota
	// PendingReboot: the change needs a GPU reset the host cannot do at runtime: pending until reboot.
	PendingReboot
	// PendingBusy: the change could apply at once, but the GPU is in use (vGPUs running): pending until the GPU
	// is idle or the host reboots.
	PendingBusy
)

// gpuProperty is one settable GPU property: where its modes live and the rules for changing them.
type gpuProperty struct {
	name  GPUProperty
	modes func(*GPUState) (current, pending *bool)
	// capable says which boards have the property (nil: every board).
	capable func(*Model) bool
	// immediate says on which boards a change applies at once while the GPU is idle (nil: none; the others apply
	// it at the next reboot).
	immediate func(*Model) bool
	// start is the mode a new host's GPUs are in.
	start func(HostSpec) bool
}

// gpuProperties is the one table of settable GPU properties.
var gpuProperties = []gpuProperty{
	{
		// NVIDIA's MIG user guide: A100-class GPUs need a GPU reset, which ESXi does at reboot; Hopper and later
		// apply the mode at once when no process uses the GPU.
		name:      GPUPropMIG,
		modes:     func(s *GPUState) (*bool, *bool) { return &s.MIGCurrent, &s.MIGPending },
		capable:   func(m *Model) bool { return m.MIGCapable },
		immediate: func(m *Model) bool { return m.MIGApply == "immediate" },
		start:     func(s HostSpec) bool { return s.MIG },
	},
	{
		// NVIDIA's vGPU user guide, "Disabling and Enabling ECC Memory": the change takes effect after a reboot;
		// data-center boards ship with ECC memory on.
		name:  GPUPropECC,
		modes: func(s *GPUState) (*bool, *bool) { return &s.ECCCurrent, &s.ECCPending },
		start: func(HostSpec) bool { return true },
	},
}

func lookupGPUProperty(name GPUProperty) (gpuProperty, bool) {
	i := slices.IndexFunc(gpuProperties, func(p gpuProperty) bool { return p.name == name })
	if i < 0 {
		return gpuProperty{}, false
	}
	return gpuProperties[i], true
}

// GPUProperties lists the settable GPU properties, in table order.
func GPUProperties() []GPUProperty {
	out := make([]GPUProperty, len(gpuProperties))
	for i, p := range gpuProperties {
		out[i] = p.name
	}
	return out
}

// newGPUState is the state a new host's GPU starts in.
func newGPUState(spec HostSpec) GPUState {
	var s GPUState
	for _, p := range gpuProperties {
		cur, pend := p.modes(&s)
		*cur = p.start(spec)
		*pend = *cur
	}
	return s
}

// Set requests one property's mode on a GPU of board m (busy: vGPUs run on it) by the property's rules; it is
// what SetGPU does, for callers that hold a snapshot of their own (the shell's tests).
func (s *GPUState) Set(m *Model, busy bool, v GPUSetting) (Outcome, error) {
	p, ok := lookupGPUProperty(v.Property)
	if !ok {
		return 0, fmt.Errorf("GPU property %q (known: %v): %w", v.Property, GPUProperties(), ErrInvalid)
	}
	if p.capable != nil && !p.capable(m) {
		return 0, fmt.Errorf("%s (%s): %w", p.name, m.Name, ErrNotCapable)
	}
	cur, pend := p.modes(s)
	*pend = v.On
	immediate := p.immediate != nil && p.immediate(m)
	if immediate && !busy {
		*cur = v.On
	}
	switch {
	case *cur == v.On:
		return Applied, nil
	case immediate:
		return PendingBusy, nil
	}
	return PendingReboot, nil
}

// Reboot applies every pending mode, except those of the properties a reboot fault ignores (their pending
// mode is dropped, as if the GPU refused it); fault may be nil.
func (s *GPUState) Reboot(fault *RebootFault) {
	for _, p := range gpuProperties {
		cur, pend := p.modes(s)
		if fault.ignores(string(p.name)) {
			*pend = *cur
		} else {
			*cur = *pend
		}
	}
}

// idle applies the pending modes a board applies at once, now that no vGPU runs on the GPU.
func (s *GPUState) idle(m *Model) {
	for _, p := range gpuProperties {
		if p.immediate != nil && p.immediate(m) {
			cur, pend := p.modes(s)
			*cur = *pend
		}
	}
}

// SetGPU requests one property's mode on one GPU (nvidia-smi -i N -mig 1, -e 0): the one write of GPU
// properties. Errors: ErrNotFound (host, GPU), ErrNotCapable (the board has no such mode), ErrInvalid.
func (f *Farm) SetGPU(hostName, pciID string, v GPUSetting) (Outcome, error) {
	f.mu.Lock()
	h, err := f.host(hostName)
	var g *gpu
	if err == nil {
		g, err = h.gpu(pciID)
	}
	var o Outcome
	if err == nil {
		if o, err = g.state.Set(g.model, len(g.slots) > 0, v); err != nil {
			err = fmt.Errorf("GPU %s on host %s: %w", pciID, hostName, err)
		}
	}
	f.mu.Unlock()
	if err != nil {
		return 0, err
	}
	f.notify(Event{Host: hostName, What: string(v.Property)})
	return o, nil
}

// SetMIGMode is SetGPU for MIG mode, answered as a MIGResult (the vSphere side's tests use it).
func (f *Farm) SetMIGMode(hostName, pciID string, enable bool) (MIGResult, error) {
	o, err := f.SetGPU(hostName, pciID, GPUSetting{Property: GPUPropMIG, On: enable})
	if err != nil {
		return MIGResult{}, err
	}
	applied := o == Applied
	return MIGResult{Applied: applied, Pending: !applied, Current: enable == applied, PendingMode: enable}, nil
}
