package esxsh

import "strconv"

// GIProfile is one GPU instance profile as `nvidia-smi mig -lgip` and `-lgipp` list it. Name, ID,
// placements and size come from the vGPU type catalogue (through the Backend); the columns nvidia-smi
// prints beside them come from real captures (printedColumns).
type GIProfile struct {
	Name                        string // without the "MIG " prefix, e.g. 1g.5gb, 1g.5gb+me
	ID                          int
	Total                       int     // instances of this profile that fit on an empty GPU
	MemoryGiB                   float64 // as printed, two decimals
	SM, DEC, ENC, CE, JPEG, OFA int
	Starts                      []int // placement start memory slices
	Size                        int   // memory slices per instance
}

// printed is what nvidia-smi prints for a GPU instance profile beyond its geometry.
type printed struct {
	Total                       int
	MemoryGiB                   float64
	SM, DEC, ENC, CE, JPEG, OFA int
}

// printedColumns holds those columns by architecture, board framebuffer (GB) and profile name, as real
// drivers print them (sources in tests/fixtures/nvidia-smi/README.md): A100 40GB and 80GB (R525+),
// H100 80GB.
var printedColumns = map[string]printed{
	"Ampere/40/1g.5gb":    {7, 4.75, 14, 0, 0, 1, 0, 0},
	"Ampere/40/1g.5gb+me": {1, 4.75, 14, 1, 0, 1, 1, 1},
	"Ampere/40/1g.10gb":   {4, 9.62, 14, 1, 0, 1, 0, 0},
	"Ampere/40/2g.10gb":   {3, 9.62, 28, 1, 0, 2, 0, 0},
	"Ampere/40/3g.20gb":   {2, 19.50, 42, 2, 0, 3, 0, 0},
	"Ampere/40/4g.20gb":   {1, 19.50, 56, 2, 0, 4, 0, 0},
	"Ampere/40/7g.40gb":   {1, 39.25, 98, 5, 0, 7, 1, 1},

	"Ampere/80/1g.10gb":    {7, 9.75, 14, 0, 0, 1, 0, 0},
	"Ampere/80/1g.10gb+me": {1, 9.75, 14, 1, 0, 1, 1, 1},
	"Ampere/80/1g.20gb":    {4, 19.50, 14, 1, 0, 1, 0, 0},
	"Ampere/80/2g.20gb":    {3, 19.50, 28, 1, 0, 2, 0, 0},
	"Ampere/80/3g.40gb":    {2, 39.25, 42, 2, 0, 3, 0, 0},
	"Ampere/80/4g.40gb":    {1, 39.25, 56, 2, 0, 4, 0, 0},
	"Ampere/80/7g.80gb":    {1, 78.50, 98, 5, 0, 7, 1, 1},

	"Hopper/80/1g.10gb":    {7, 9.75, 16, 1, 0, 1, 1, 0},
	"Hopper/80/1g.10gb+me": {1, 9.75, 16, 1, 0, 1, 1, 1},
	"Hopper/80/1g.20gb":    {4, 19.62, 26, 1, 0, 1, 1, 0},
	"Hopper/80/2g.20gb":    {3, 19.62, 32, 2, 0, 2, 2, 0},
	"Hopper/80/3g.40gb":    {2, 39.50, 60, 3, 0, 3, 3, 0},
	"Hopper/80/4g.40gb":    {1, 39.50, 64, 4, 0, 4, 4, 0},
	"Hopper/80/7g.80gb":    {1, 79.25, 132, 7, 0, 8, 7, 1},
}

// NewGIProfile completes a catalogue GPU instance profile with the columns nvidia-smi prints. Without a
// capture for the architecture and framebuffer, memory is the catalogue's, the instance total is what
// the placements allow, and the engine counts print as 0.
func NewGIProfile(architecture string, boardFbGB int, name string, id int, memoryGB float64, starts []int, size int) GIProfile {
	p := GIProfile{Name: name, ID: id, MemoryGiB: memoryGB, Starts: append([]int(nil), starts...), Size: size}
	if c, ok := printedColumns[columnsKey(architecture, boardFbGB, name)]; ok {
		p.Total, p.MemoryGiB = c.Total, c.MemoryGiB
		p.SM, p.DEC, p.ENC, p.CE, p.JPEG, p.OFA = c.SM, c.DEC, c.ENC, c.CE, c.JPEG, c.OFA
		return p
	}
	p.Total = freeInstances(GIProfile{Starts: p.Starts, Size: size, Total: len(starts)}, nil)
	return p
}

// HasPrintedColumns reports whether real captures give the printed columns of a profile.
func HasPrintedColumns(architecture string, boardFbGB int, name string) bool {
	_, ok := printedColumns[columnsKey(architecture, boardFbGB, name)]
	return ok
}

func columnsKey(architecture string, boardFbGB int, name string) string {
	return architecture + "/" + strconv.Itoa(boardFbGB) + "/" + name
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
