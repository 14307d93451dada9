package esxsh

import (
	"path/filepath"

	"gpusim/internal/farm"
)

// catalogueMIG returns a catalogue board's GPU instance profiles with nvidia-smi's columns, as gpusim's
// backend builds them (the shell's tests read the same catalogue file as the rest of gpusim).
func catalogueMIG(model, architecture string) []GIProfile {
	cat, err := farm.LoadCatalogFile(filepath.Join("..", "..", "..", "..", filepath.FromSlash(farm.CatalogueRelPath)))
	if err != nil {
		panic(err)
	}
	m, ok := cat.Model(model)
	if !ok {
		panic("no model " + model)
	}
	var out []GIProfile
	for _, p := range m.GIProfiles {
		out = append(out, NewGIProfile(architecture, m.FramebufferGB, p.Name, p.ID, p.MemoryGB, p.Starts, p.Size))
	}
	return out
}
