package farm

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"

	"gopkg.in/yaml.v3"
)

// NVIDIA's vGPU Manager / guest driver rule, read from the release table vgpuctl reads too
// (vgpuctl/data/vgpu-releases.yaml, beside the catalogue; vgpuctl/releases.py holds the same rule): NVIDIA,
// "Virtual GPU Software R580 for VMware vSphere Release Notes" 19.0, 1.2 "Compatibility Requirements for the
// NVIDIA vGPU Manager and Guest VM Driver": the same release; a later major release branch with guest drivers
// of the previous branch; a later long-term support branch with guest drivers of the previous long-term
// support branch (releases within one branch only where that branch's notes list them).

// ReleasesFile is the release table's name, beside the catalogue.
const ReleasesFile = "vgpu-releases.yaml"

var driverVersion = regexp.MustCompile(`(\d{3})\.(\d+)(?:\.(\d+))?`)

type releaseBranch struct {
	Branch        int    `yaml:"branch"`
	Track         string `yaml:"track"`
	MixesReleases bool   `yaml:"mixes_releases"`
}

type release struct {
	VGPU    string `yaml:"vgpu"`
	Branch  int    `yaml:"branch"`
	Manager string `yaml:"manager"`
	Linux   string `yaml:"linux"`
	Windows string `yaml:"windows"`
}

// Releases is the release table: branches in order and the releases a source gives versions for.
type Releases struct {
	Branches []releaseBranch `yaml:"branches"`
	Releases []release       `yaml:"releases"`
}

// LoadReleasesBeside reads the release table next to the catalogue's file.
func LoadReleasesBeside(c *Catalog) (*Releases, error) {
	path := c.Path
	if path == "" {
		found, err := FindCatalogue("")
		if err != nil {
			return nil, err
		}
		path = found
	}
	data, err := os.ReadFile(filepath.Join(filepath.Dir(path), ReleasesFile))
	if err != nil {
		return nil, fmt.Errorf("release table: %w", err)
	}
	var r Releases
	if err := yaml.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("release table: %w", err)
	}
	slices.SortFunc(r.Branches, func(a, b releaseBranch) int { return a.Branch - b.Branch })
	return &r, nil
}

// DriverVersion is the driver version in a text (`580.65.05` in `580.65.05-1OEM.800.1.0.20613240`), "" when none.
func DriverVersion(text string) string {
	return driverVersion.FindString(text)
}

func branchOf(version string) int {
	m := driverVersion.FindStringSubmatch(version)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

func (r *Releases) managerRelease(v string) string {
	for _, rel := range r.Releases {
		if rel.Manager == DriverVersion(v) {
			return rel.VGPU
		}
	}
	return ""
}

func (r *Releases) guestRelease(v string) (string, int) {
	for _, rel := range r.Releases {
		if d := DriverVersion(v); rel.Linux == d || rel.Windows == d {
			return rel.VGPU, rel.Branch
		}
	}
	return "", branchOf(v)
}

func (r *Releases) branch(n int) (releaseBranch, int, bool) {
	for i, b := range r.Branches {
		if b.Branch == n {
			return b, i, true
		}
	}
	return releaseBranch{}, 0, false
}

// Compatible reports whether a guest driver version may run under a vGPU Manager version, and why not: false
// where NVIDIA's rule excludes the pair as far as the table tells (a newer branch, an older branch that is
// neither the previous one nor the previous LTS one, or two releases of one branch both listed and different
// where the branch's notes do not allow that). A pair the table cannot place runs: a real host would load it
// and gpusim cannot know better (vgpuctl's planner refuses such a pair itself).
func (r *Releases) Compatible(manager, guest string) (bool, string) {
	mb := branchOf(manager)
	gr, gb := r.guestRelease(guest)
	if mb == 0 || gb == 0 {
		return true, ""
	}
	if mb == gb {
		mr := r.managerRelease(manager)
		b, _, ok := r.branch(mb)
		if mr != "" && gr != "" && mr != gr && !(ok && b.MixesReleases) {
			return false, fmt.Sprintf("guest driver %s (vGPU %s) is not of the vGPU Manager %s's release (vGPU %s)",
				guest, gr, manager, mr)
		}
		return true, ""
	}
	m, mi, okm := r.branch(mb)
	g, gi, okg := r.branch(gb)
	switch {
	case !okm || !okg:
		return true, ""
	case gb > mb:
		return false, fmt.Sprintf("guest driver %s is of a newer branch than the vGPU Manager %s", guest, manager)
	case mi-gi == 1:
		return true, ""
	case m.Track == "lts" && g.Track == "lts" && r.ltsIndex(mb)-r.ltsIndex(gb) == 1:
		return true, ""
	}
	return false, fmt.Sprintf("guest driver %s is more than one branch older than the vGPU Manager %s", guest, manager)
}

func (r *Releases) ltsIndex(branch int) int {
	i := 0
	for _, b := range r.Branches {
		if b.Track != "lts" {
			continue
		}
		if b.Branch == branch {
			return i
		}
		i++
	}
	return -1
}
