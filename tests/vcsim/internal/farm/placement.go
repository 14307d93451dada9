package farm

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
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
	VM            string   `json:"vm"`                      // VM managed object id (or a label in pure placement)
	VMName        string   `json:"vmName,omitempty"`        // VM name
	Profile       string   `json:"profile"`                 // vGPU profile as spelled by the VM
	Start         int      `json:"start"`                   // MIG placement start slot; -1 when time-sliced
	Size          int      `json:"size"`                    // MIG placement size in memory slots; 0 when time-sliced
	GI            string   `json:"gi,omitempty"`            // MIG GPU instance profile
	Placement     *float64 `json:"placement,omitempty"`     // mixed-size placement id
	PlacementSize float64  `json:"placementSize,omitempty"` // mixed-size placement size
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
	NVLinkGroups []int // sizes of the NVLink device groups the GPU's set offers (NVLinkOffers)
	Slots        []Slot
	HostOnly     []string // profiles the host offers that no catalogue entry explains
	SingleType   bool     // the driver runs one time-sliced vGPU type per GPU at a time
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

// Rules are the placement rules that depend on the vSphere version.
type Rules struct {
	// SameSizeAnyType: on an equal-size GPU, vGPUs of different types with the same framebuffer may
	// share the GPU (from the catalogue's vsphere.same_size_any_type_since, where the driver allows it);
	// otherwise only the identical type.
	SameSizeAnyType bool
}

// APIAtLeast reports whether a dotted vSphere API version (8.0.3.0) is at least want (8.0.1).
func APIAtLeast(version, want string) bool {
	a, b := strings.Split(version, "."), strings.Split(want, ".")
	for i := 0; i < len(b); i++ {
		x, y := 0, 0
		if i < len(a) {
			x, _ = strconv.Atoi(a[i])
		}
		y, _ = strconv.Atoi(b[i])
		if x != y {
			return x > y
		}
	}
	return true
}

// Unavailable says why no new vGPU goes on the GPU whatever its type, or "" when some may.
func (c *Candidate) Unavailable(cat *Catalog) string {
	switch {
	case c.Model == nil:
		return "unknown GPU model"
	case !c.SharedDirect:
		return "graphics type is not sharedDirect"
	}
	for _, s := range c.Slots {
		if _, err := cat.Profile(s.Profile); err != nil {
			return fmt.Sprintf("holds vGPU %q, which no catalogue entry explains", s.Profile)
		}
	}
	return ""
}

// Fits reports whether a vGPU of profile p fits on GPU c and, for MIG and mixed-size, where.
func (c *Candidate) Fits(cat *Catalog, p Profile, rules Rules) (Slot, bool) {
	slot := Slot{Profile: p.Name, Start: -1}
	if p.Opaque {
		// nothing is known about it but that the host offers it: it gets a GPU of its own
		return slot, c.Unavailable(cat) == "" && len(c.Slots) == 0 && slices.Contains(c.HostOnly, p.Name)
	}
	if c.Unavailable(cat) != "" || !c.Model.Offers(p, c.MIG) {
		return slot, false
	}
	if c.MIG {
		return c.fitMIG(cat, p, slot)
	}
	used := make([]Profile, 0, len(c.Slots))
	for _, s := range c.Slots {
		sp, _ := cat.Profile(s.Profile) // Unavailable checked every slot
		if sp.MIG {
			return slot, false
		}
		used = append(used, sp)
	}
	if c.VgpuMode == ModeMixedSize {
		return c.fitMixed(p, used, slot)
	}
	limit := c.Model.MaxEqual(p.spec)
	for _, sp := range used {
		if math.Abs(sp.FbGB-p.FbGB) > 1e-9 || (!rules.SameSizeAnyType || c.SingleType) && !sp.SameType(p) {
			return slot, false
		}
		if t := c.Model.Type(sp.Type); t != nil {
			limit = min(limit, c.Model.MaxEqual(t))
		}
	}
	return slot, len(used) < limit
}

// fitMixed: the type needs NVIDIA's mixed-size maximum; its count stays within it, the framebuffers
// fit the GPU, and where every vGPU involved has placement ids the new one takes the free placement id
// that leaves the least room for further vGPUs (see MixedPlacement). A GPU holding a vGPU that got no
// placement id although every vGPU there has published ids (a history that does not fit) takes no more.
func (c *Candidate) fitMixed(p Profile, used []Profile, slot Slot) (Slot, bool) {
	t := p.spec
	if !t.Mixable() {
		return slot, false
	}
	same, total, historyByIDs := 0, p.FbGB, true
	for _, sp := range used {
		if sp.Series != p.Series || !sp.spec.Mixable() {
			return slot, false
		}
		if sp.SameType(p) {
			same++
		}
		total += sp.FbGB
		historyByIDs = historyByIDs && sp.spec.HasPlacements()
	}
	if historyByIDs {
		for _, s := range c.Slots {
			if s.Placement == nil {
				return slot, false
			}
		}
	}
	if same >= c.Model.MaxMixed(t) || total > float64(c.Model.FramebufferGB)+1e-9 {
		return slot, false
	}
	if !historyByIDs || !t.HasPlacements() {
		return slot, true
	}
	id, ok := MixedPlacement(c.Model, c.Slots, t)
	if !ok {
		return slot, false
	}
	slot.Placement, slot.PlacementSize = &id, *t.PlacementSize
	return slot, true
}

// HasPlacements reports whether NVIDIA publishes the type's mixed-size placement size and ids.
func (t *VGPUType) HasPlacements() bool {
	return t.PlacementSize != nil && *t.PlacementSize > 0 && len(t.PlacementIDs) > 0
}

// MixedPlacement chooses the placement id of a new vGPU of type t on a mixed-size GPU holding placed.
// The vGPU Manager chooses and vSphere does not let the admin say, so gpusim and the planner assume the
// worst: of the type's ids whose range [id, id+size) overlaps no placed vGPU, the one after which the
// fewest placement ids of the board's types of t's series remain free; ties go to the lowest id.
func MixedPlacement(m *Model, placed []Slot, t *VGPUType) (float64, bool) {
	size := *t.PlacementSize
	best, bestRoom, found := 0.0, 0, false
	for _, id := range t.PlacementIDs {
		if !placementFree(placed, id, size) {
			continue
		}
		after := append(append([]Slot(nil), placed...), Slot{Placement: &id, PlacementSize: size})
		room := mixedRoom(m, t.Series, after)
		if !found || room < bestRoom || room == bestRoom && id < best {
			best, bestRoom, found = id, room, true
		}
	}
	return best, found
}

// placementFree reports whether [id, id+size) overlaps no placed vGPU.
func placementFree(placed []Slot, id, size float64) bool {
	for _, s := range placed {
		if s.Placement != nil && id < *s.Placement+s.PlacementSize && *s.Placement < id+size {
			return false
		}
	}
	return true
}

// mixedRoom counts the free placement ids of every mixed-size type of the board in one series (a
// mixed-size GPU holds one series).
func mixedRoom(m *Model, series string, placed []Slot) int {
	n := 0
	for i := range m.Types {
		t := &m.Types[i]
		if !strings.EqualFold(t.Series, series) || !t.Mixable() || !t.HasPlacements() {
			continue
		}
		for _, id := range t.PlacementIDs {
			if placementFree(placed, id, *t.PlacementSize) {
				n++
			}
		}
	}
	return n
}

// fitMIG places the vGPU's GPU instance at the allowed free start that leaves the least room for
// further instances (see MIGStart), within the type's published maximum per GPU (one media
// extension instance, for example).
func (c *Candidate) fitMIG(cat *Catalog, p Profile, slot Slot) (Slot, bool) {
	gi := c.Model.GIProfile(p.GI)
	if gi == nil {
		return slot, false
	}
	used := make([]bool, c.Model.MIGSlots)
	same := 0
	for _, s := range c.Slots {
		if s.Start < 0 {
			return slot, false
		}
		occupy(used, s.Start, s.Size)
		if sp, err := cat.Profile(s.Profile); err == nil && sp.SameType(p) {
			same++
		}
	}
	if p.spec.MaxEqual != nil && same >= *p.spec.MaxEqual { // the MIG geometry, not the framebuffer, holds these
		return slot, false
	}
	start, ok := MIGStart(c.Model, used, gi)
	if !ok {
		return slot, false
	}
	slot.Start, slot.Size, slot.GI = start, gi.Size, gi.Name
	return slot, true
}

// MIGStart chooses where a new GPU instance goes. vSphere does not document its choice, so gpusim and
// the planner assume the worst: of the allowed free starts, the one after which the fewest placements
// of all of the board's GPU instance profiles remain free; ties go to the lowest start.
func MIGStart(m *Model, used []bool, gi *GIProfile) (int, bool) {
	best, bestRoom := -1, 0
	for _, start := range gi.Starts {
		if !free(used, start, gi.Size) {
			continue
		}
		after := append([]bool(nil), used...)
		occupy(after, start, gi.Size)
		room := migRoom(m, after)
		if best < 0 || room < bestRoom {
			best, bestRoom = start, room
		}
	}
	return best, best >= 0
}

// migRoom counts the free placements of every GPU instance profile of the board.
func migRoom(m *Model, used []bool) int {
	n := 0
	for i := range m.GIProfiles {
		for _, s := range m.GIProfiles[i].Starts {
			if free(used, s, m.GIProfiles[i].Size) {
				n++
			}
		}
	}
	return n
}

// Place decides where the request's vGPUs go under the rules of docs/gpu-rules.md: descending
// framebuffer order, each vGPU on its own GPU, candidates in PCI id order, spread (performance) or
// pack (consolidation), NVLink sets for NVLink requests, all or nothing. The candidates are not changed.
func Place(cat *Catalog, gpus []Candidate, req Request, policy string, rules Rules) ([]Assignment, error) {
	profiles := make([]Profile, len(req.Profiles))
	for i, name := range req.Profiles {
		p, err := cat.Profile(name)
		if err != nil {
			p = Profile{Name: name, Opaque: true} // fits only where the host offers it (Candidate.HostOnly)
		}
		profiles[i] = p
	}
	sorted := make([]Candidate, len(gpus))
	copy(sorted, gpus)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].ID < sorted[j].ID })
	pl := placer{cat: cat, policy: policy, rules: rules}
	if !req.NVLink {
		if a, ok := pl.placeOn(sorted, profiles); ok {
			return a, nil
		}
		return nil, fmt.Errorf("%s", InsufficientGraphics)
	}
	for _, set := range nvlinkSets(sorted) {
		if !offersGroup(set, len(profiles)) {
			continue // vSphere attaches a device group whole: the VM's vGPUs must fill one group
		}
		if !groupProfile(set, profiles) {
			continue // the set's groups are offered for its board's whole-GPU C-series type only
		}
		if a, ok := pl.placeOn(set, profiles); ok {
			return a, nil
		}
	}
	return nil, fmt.Errorf("%s", InsufficientGraphics)
}

type placer struct {
	cat    *Catalog
	policy string
	rules  Rules
}

// nvswitchGroupSizes are the NVLink device group sizes an NVSwitch fabric offers (docs/gpu-rules.md).
var nvswitchGroupSizes = []int{2, 4, 8}

// NVLinkGroupSizes is what an NVLink set of n GPUs offers as device groups under a host topology (pairs,
// quads or nvswitch): NVSwitch connects any GPUs of its set, so groups of 2, 4 and 8 as far as the set has
// them; a bridge set (pair or quad) is one group of all its GPUs.
func NVLinkGroupSizes(topology string, n int) []int {
	switch {
	case topology == NVLinkNVSwitch:
		var out []int
		for _, size := range nvswitchGroupSizes {
			if size <= n {
				out = append(out, size)
			}
		}
		return out
	case (topology == NVLinkPairs || topology == NVLinkQuads) && n >= 2:
		return []int{n}
	}
	return nil
}

// NVLinkOffer is one NVLink set as the host offers it in vendor device groups.
type NVLinkOffer struct {
	Set   int
	GPUs  []GPUInfo // the set's GPUs that can join a group: NVLink up, time-sliced, in host order
	Sizes []int     // group sizes offered
}

// NVLinkOffers lists the host's NVLink device groups by set: what QueryConfigTarget reports and what
// admission accepts. NVLink P2P needs whole-GPU time-sliced vGPUs: a GPU in MIG mode or with its links down
// joins no group, and a board without a whole-GPU C-series type offers none.
func NVLinkOffers(info HostInfo) []NVLinkOffer {
	sets := map[int][]GPUInfo{}
	var ids []int
	for _, g := range info.GPUs {
		if g.NVLinkSet < 0 || !g.NVLinkUp || g.MIGCurrent {
			continue
		}
		if _, ok := sets[g.NVLinkSet]; !ok {
			ids = append(ids, g.NVLinkSet)
		}
		sets[g.NVLinkSet] = append(sets[g.NVLinkSet], g)
	}
	sort.Ints(ids)
	var out []NVLinkOffer
	for _, id := range ids {
		set := sets[id]
		sizes := NVLinkGroupSizes(info.NVLinkTopology, len(set))
		if len(sizes) == 0 || set[0].Model == nil || set[0].Model.WholeGPUComputeType() == nil {
			continue
		}
		out = append(out, NVLinkOffer{Set: id, GPUs: set, Sizes: sizes})
	}
	return out
}

// offersGroup reports whether an NVLink set offers a device group of n GPUs.
func offersGroup(set []Candidate, n int) bool {
	for _, c := range set {
		if slices.Contains(c.NVLinkGroups, n) {
			return true
		}
	}
	return false
}

// groupProfile reports whether every profile is of the type an NVLink set's device groups are offered for:
// the board's whole-GPU C-series type (NVLinkOffers, deviceGroups' names), in either spelling.
func groupProfile(set []Candidate, profiles []Profile) bool {
	if len(set) == 0 || set[0].Model == nil {
		return false
	}
	whole := set[0].Model.WholeGPUComputeType()
	for _, p := range profiles {
		if whole == nil || p.Opaque || !strings.EqualFold(p.Type, whole.Name) {
			return false
		}
	}
	return true
}

// nvlinkSets groups NVLink-connected GPUs with NVLink up, ordered by their lowest PCI id. A GPU in MIG
// mode is in no device group.
func nvlinkSets(sorted []Candidate) [][]Candidate {
	index := map[int]int{}
	var sets [][]Candidate
	for _, c := range sorted {
		if c.NVLinkSet < 0 || !c.NVLinkUp || c.MIG {
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

func (pl placer) placeOn(gpus []Candidate, profiles []Profile) ([]Assignment, bool) {
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
			slot, ok := work[g].Fits(pl.cat, profiles[idx], pl.rules)
			if !ok {
				continue
			}
			if best < 0 || better(len(work[g].Slots), len(work[best].Slots), pl.policy) {
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
