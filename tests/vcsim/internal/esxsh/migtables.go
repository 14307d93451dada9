package esxsh

// GIProfile is one GPU instance profile as `nvidia-smi mig -lgip` and `-lgipp` list it.
type GIProfile struct {
	Name                        string // without the "MIG " prefix, e.g. 1g.5gb, 1g.5gb+me
	ID                          int
	Total                       int     // instances of this profile that fit on an empty GPU
	MemoryGiB                   float64 // as printed, two decimals
	SM, DEC, ENC, CE, JPEG, OFA int
	Starts                      []int // placement start memory slices
	Size                        int   // memory slices per instance
}

// migTables holds the GPU instance profiles per vGPU board. The numbers are the ones real drivers
// print (sources in tests/fixtures/nvidia-smi/README.md); the placements match docs/gpu-rules.md.
var migTables = map[string][]GIProfile{
	// A100-40GB (A100-PCIE-40GB, A100-SXM4-40GB), R525+ drivers.
	"a100": {
		{"1g.5gb", 19, 7, 4.75, 14, 0, 0, 1, 0, 0, []int{0, 1, 2, 3, 4, 5, 6}, 1},
		{"1g.5gb+me", 20, 1, 4.75, 14, 1, 0, 1, 1, 1, []int{0, 1, 2, 3, 4, 5, 6}, 1},
		{"1g.10gb", 15, 4, 9.62, 14, 1, 0, 1, 0, 0, []int{0, 2, 4, 6}, 2},
		{"2g.10gb", 14, 3, 9.62, 28, 1, 0, 2, 0, 0, []int{0, 2, 4}, 2},
		{"3g.20gb", 9, 2, 19.50, 42, 2, 0, 3, 0, 0, []int{0, 4}, 4},
		{"4g.20gb", 5, 1, 19.50, 56, 2, 0, 4, 0, 0, []int{0}, 4},
		{"7g.40gb", 0, 1, 39.25, 98, 5, 0, 7, 1, 1, []int{0}, 8},
	},
	// A100-80GB (A100-SXM4-80GB, A100 80GB PCIe).
	"a100d": {
		{"1g.10gb", 19, 7, 9.75, 14, 0, 0, 1, 0, 0, []int{0, 1, 2, 3, 4, 5, 6}, 1},
		{"1g.10gb+me", 20, 1, 9.75, 14, 1, 0, 1, 1, 1, []int{0, 1, 2, 3, 4, 5, 6}, 1},
		{"1g.20gb", 15, 4, 19.50, 14, 1, 0, 1, 0, 0, []int{0, 2, 4, 6}, 2},
		{"2g.20gb", 14, 3, 19.50, 28, 1, 0, 2, 0, 0, []int{0, 2, 4}, 2},
		{"3g.40gb", 9, 2, 39.25, 42, 2, 0, 3, 0, 0, []int{0, 4}, 4},
		{"4g.40gb", 5, 1, 39.25, 56, 2, 0, 4, 0, 0, []int{0}, 4},
		{"7g.80gb", 0, 1, 78.50, 98, 5, 0, 7, 1, 1, []int{0}, 8},
	},
	// H100-80GB (H100 SXM5 80GB HBM3, H100 PCIe).
	"h100": {
		{"1g.10gb", 19, 7, 9.75, 16, 1, 0, 1, 1, 0, []int{0, 1, 2, 3, 4, 5, 6}, 1},
		{"1g.10gb+me", 20, 1, 9.75, 16, 1, 0, 1, 1, 1, []int{0, 1, 2, 3, 4, 5, 6}, 1},
		{"1g.20gb", 15, 4, 19.62, 26, 1, 0, 1, 1, 0, []int{0, 2, 4, 6}, 2},
		{"2g.20gb", 14, 3, 19.62, 32, 2, 0, 2, 2, 0, []int{0, 2, 4}, 2},
		{"3g.40gb", 9, 2, 39.50, 60, 3, 0, 3, 3, 0, []int{0, 4}, 4},
		{"4g.40gb", 5, 1, 39.50, 64, 4, 0, 4, 4, 0, []int{0}, 4},
		{"7g.80gb", 0, 1, 79.25, 132, 7, 0, 8, 7, 1, []int{0}, 8},
	},
}

// MIGProfiles returns the GPU instance profiles of a board, nil when the board has no MIG.
func MIGProfiles(board string) []GIProfile {
	return migTables[board]
}

// freeInstances is how many more instances of p fit next to the instances in use, taking the lowest
// free placement each time (the "Free" of `mig -lgip`).
func freeInstances(p GIProfile, used []MIGInstance) int {
	var occupied [8]bool
	for _, in := range used {
		for s := in.Start; s < in.Start+in.Size && s < len(occupied); s++ {
			occupied[s] = true
		}
	}
	sameProfile := 0
	for _, in := range used {
		if in.Profile == p.Name {
			sameProfile++
		}
	}
	free := 0
	for _, start := range p.Starts {
		fits := true
		for s := start; s < start+p.Size; s++ {
			if s >= len(occupied) || occupied[s] {
				fits = false
				break
			}
		}
		if !fits {
			continue
		}
		for s := start; s < start+p.Size; s++ {
			occupied[s] = true
		}
		free++
	}
	if free > p.Total-sameProfile {
		free = p.Total - sameProfile
	}
	if free < 0 {
		free = 0
	}
	return free
}
