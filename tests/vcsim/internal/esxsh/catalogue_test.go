package esxsh

import (
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"gpusim/internal/farm"
)

// testCatalogue is the vGPU type catalogue gpusim reads, loaded once for the package's tests.
var testCatalogue = sync.OnceValue(func() *farm.Catalog {
	cat, err := farm.LoadCatalogFile(filepath.Join("..", "..", "..", "..", filepath.FromSlash(farm.CatalogueRelPath)))
	if err != nil {
		panic(err)
	}
	return cat
})

// catalogueMIG returns a catalogue board's GPU instance profiles with nvidia-smi's columns, as the shell's
// view derives them.
func catalogueMIG(model string) []GIProfile {
	m := catalogueModel(model)
	return migProfiles(&m)
}

// The shell lists exactly the catalogue's GPU instance profiles (what admission uses), and every board
// whose architecture and framebuffer have a real capture prints the captured columns.
func TestShellMIGProfilesComeFromCatalogue(t *testing.T) {
	cat := testCatalogue()
	captured := map[string]bool{"A100-40GB": true, "A100-80GB": true, "H100-80GB": true, "A100-HGX-40GB": true,
		"A100-HGX-80GB": true, "H100-SXM5-80GB": true}
	for _, m := range cat.Models() {
		shell := migProfiles(m)
		if !m.MIGCapable {
			if shell != nil {
				t.Errorf("%s: shell has MIG profiles for a board without MIG", m.Name)
			}
			continue
		}
		if len(shell) != len(m.GIProfiles) {
			t.Fatalf("%s: shell lists %d profiles, catalogue %d", m.Name, len(shell), len(m.GIProfiles))
		}
		for i, p := range m.GIProfiles {
			s := shell[i]
			if s.Name != p.Name || s.ID != p.ID || s.Size != p.Size || !slices.Equal(s.Starts, p.Starts) {
				t.Errorf("%s %s: shell %+v, catalogue %+v", m.Name, p.Name, s, p)
			}
			if captured[m.Name] && !HasPrintedColumns(architecture(m.Board), m.FramebufferGB, p.Name) {
				t.Errorf("%s %s: no captured nvidia-smi columns", m.Name, p.Name)
			}
		}
	}
}
