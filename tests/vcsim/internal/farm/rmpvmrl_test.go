package farm

import (
	"os"
	"path/filepath"
	"testing"

	"gopkg.in/yaml.v3"
)

// The same vectors vgpuctl's tests read (tests/unit/test_scheduler.py).
func TestDecodeRmPVMRLSharedVectors(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "fixtures", "scheduler", "rmpvmrl.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Decode []struct {
			Value           string `yaml:"value"`
			Policy          string `yaml:"policy"`
			Mode            string `yaml:"mode"`
			TimesliceMs     *int   `yaml:"timeslice_ms"`
			FrequencyHz     *int   `yaml:"frequency_hz"`
			AveragingFactor *int   `yaml:"averaging_factor"`
			Label           string `yaml:"label"`
		} `yaml:"decode"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Decode) < 10 {
		t.Fatalf("only %d vectors", len(doc.Decode))
	}
	deref := func(p *int) int {
		if p == nil {
			return 0
		}
		return *p
	}
	for _, c := range doc.Decode {
		t.Run(c.Value, func(t *testing.T) {
			got := DecodeRmPVMRL(c.Value)
			want := Scheduler{Policy: c.Policy, Mode: c.Mode, TimesliceMs: deref(c.TimesliceMs),
				FrequencyHz: deref(c.FrequencyHz), AveragingFactor: deref(c.AveragingFactor), RmPVMRL: c.Value}
			if got != want || got.Label() != c.Label {
				t.Errorf("DecodeRmPVMRL(%q) = %+v %q, want %+v %q", c.Value, got, got.Label(), want, c.Label)
			}
		})
	}
}
