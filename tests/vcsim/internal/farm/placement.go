package farm

import (
	"fmt"
	"sort"
)

// Policies for spreading or packing vGPUs (graphicsConfig.sharedPassthruAssignmentPolicy).
const (
	PolicyPerformance   = "performance"
	PolicyConsolidation = "consolidation"
)

// vGPU modes as vSphere reports them (graphicsInfo.vgpuMode).
const (
	ModeSameSize  = "sameSize"
	ModeMixedSize = "mixedSize"
	ModeMIG       = "multiInstanceGpu"
)

// InsufficientGraphics is vSphere's message when a VM's vGPUs cannot be admitted.
const InsufficientGraphics = "The amount of graphics resource available in the parent resource pool is insufficient for the operation."

// Slot is one vGPU placed on a physical GPU.
type Slot struct {
	VM      string `json:"vm"`               // VM managed object id (or a label in pure placement)
	VMName  string `json:"vmName,omitempty"` // VM name
	Profile string `json:"profile"`          // vGPU profile
	Start   int    `json:"start"`            // MIG placement start slot; -1 when time-sliced
	Size    int    `json:"size"`             // MIG placement size in memory slots; 0 when time-sliced
	GI      string `json:"gi,omitempty"`     // MIG GPU instance profile
}

// Candidate is the placement view of one physical GPU.
type Candidate struct {
	ID           string // PCI id
	Model        *Model
	MIG          bool   // MIG mode currently enabled
	VgpuMode     string // sameSize or mixedSize when time-sliced
	SharedDirect bool   // graphicsType is sharedDirect
	NVLinkSet    int    // -1 when not NVLink-connected
	NVLinkUp     bool
	Slots        []Slot
}

// Assignment says where one requested vGPU goes.
type Assignment struct {
	Index int    `json:"index"` // index of the vGPU in the request
	GPU   string `json:"gpu"`   // PCI id
	Slot  Slot   `json:"slot"`
}

// Request is what one VM needs at power-on.
type Request struct {
	Profiles []string
	NVLink   bool // the VM has deviceGroups: only one NVLink-connected set with NVLink up
}

// Fits reports whether a vGPU of profile p fits on GPU c and, for MIG, where.
func (c *Candidate) Fits(p Profile) (Slot, bool) {
	slot := Slot{Profile: p.Name, Start: -1}
	if !c.SharedDirect || c.Model == nil || p.Board != c.Model.Board || !c.Model.Offers(p.Name, c.MIG) {
		return slot, false
	}
	if c.MIG {
		gi := c.Model.GIProfile(p.GI)
		if gi == nil {
			return slot, false
		}
		used := make([]bool, c.Model.MIGSlots)
		for _, s := range c.Slots {
			if s.Start >= 0 {
				occupy(used, s.Start, s.Size)
			}
		}
		for _, start := range gi.Starts {
			if free(used, start, gi.Size) {
				slot.Start, slot.Size, slot.GI = start, gi.Size, gi.Name
				return slot, true
			}
		}
		return slot, false
	}
	total := 0
	for _, s := range c.Slots {
		sp, err := ParseProfile(s.Profile)
		if err != nil {
			return slot, false
		}
		if c.VgpuMode != ModeMixedSize && s.Profile != p.Name {
			return slot, false
		}
		if c.VgpuMode == ModeMixedSize && sp.Series != p.Series {
			return slot, false
		}
		total += sp.FbGB
	}
	if c.VgpuMode == ModeMixedSize {
		return slot, total+p.FbGB <= c.Model.FramebufferGB
	}
	return slot, len(c.Slots) < c.Model.FramebufferGB/p.FbGB
}

// Place decides where the request's vGPUs go under the rules of docs/gpu-rules.md: descending
// framebuffer order, each vGPU on its own GPU, candidates in PCI id order, spread (performance) or
// pack (consolidation), NVLink sets for NVLink requests, all or nothing. The candidates are not changed.
func Place(gpus []Candidate, req Request, policy string) ([]Assignment, error) {
	profiles := make([]Profile, len(req.Profiles))
	for i, name := range req.Profiles {
		p, err := ParseProfile(name)
		if err != nil {
			return nil, err
		}
		profiles[i] = p
	}
	sorted := make([]Candidate, len(gpus))
	copy(sorted, gpus)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].ID < sorted[j].ID })
	if !req.NVLink {
		if a, ok := placeOn(sorted, profiles, policy); ok {
			return a, nil
		}
		return nil, fmt.Errorf("%s", InsufficientGraphics)
	}
	for _, set := range nvlinkSets(sorted) {
		if a, ok := placeOn(set, profiles, policy); ok {
			return a, nil
		}
	}
	return nil, fmt.Errorf("%s", InsufficientGraphics)
}

// nvlinkSets groups NVLink-connected GPUs with NVLink up, ordered by their lowest PCI id.
func nvlinkSets(sorted []Candidate) [][]Candidate {
	index := map[int]int{}
	var sets [][]Candidate
	for _, c := range sorted {
		if c.NVLinkSet < 0 || !c.NVLinkUp {
			continue
		}
		i, ok := index[c.NVLinkSet]
		if !ok {
			i = len(sets)
			index[c.NVLinkSet] = i
			sets = append(sets, nil)
		}
		sets[i] = append(sets[i], c)
	}
	// a set with a GPU whose link is down is not NVLink-connected
	var out [][]Candidate
	for _, set := range sets {
		complete := true
		for _, c := range sorted {
			if c.NVLinkSet == set[0].NVLinkSet && !c.NVLinkUp {
				complete = false
			}
		}
		if complete {
			out = append(out, set)
		}
	}
	return out
}

func placeOn(gpus []Candidate, profiles []Profile, policy string) ([]Assignment, bool) {
	work := make([]Candidate, len(gpus))
	for i := range gpus {
		work[i] = gpus[i]
		work[i].Slots = append([]Slot(nil), gpus[i].Slots...)
	}
	order := make([]int, len(profiles))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return profiles[order[a]].FbGB > profiles[order[b]].FbGB })
	taken := make([]bool, len(work))
	result := make([]Assignment, 0, len(profiles))
	for _, idx := range order {
		best, bestSlot := -1, Slot{}
		for g := range work {
			if taken[g] {
				continue
			}
			slot, ok := work[g].Fits(profiles[idx])
			if !ok {
				continue
			}
			if best < 0 || better(len(work[g].Slots), len(work[best].Slots), policy) {
				best, bestSlot = g, slot
			}
		}
		if best < 0 {
			return nil, false
		}
		taken[best] = true
		work[best].Slots = append(work[best].Slots, bestSlot)
		result = append(result, Assignment{Index: idx, GPU: work[best].ID, Slot: bestSlot})
	}
	sort.Slice(result, func(a, b int) bool { return result[a].Index < result[b].Index })
	return result, true
}

// better reports whether a GPU with n vGPUs beats the current best with m (ties keep the lower PCI id).
func better(n, m int, policy string) bool {
	if policy == PolicyConsolidation {
		return n > m
	}
	return n < m
}
