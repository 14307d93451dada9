package esxsh

import (
	"fmt"
	"strings"
	"sync"
)

// Fault kinds.
const (
	FaultHang   = "hang"   // a matching command never finishes (until the client gives up or the fault is cleared)
	FaultFail   = "fail"   // a matching command exits non-zero with a message
	FaultRefuse = "refuse" // the host's SSH port refuses connections
	FaultDrop   = "drop"   // the connection is dropped when a matching command starts
)

// Fault is one armed SSH fault.
type Fault struct {
	ID     int    `json:"id"`
	Host   string `json:"host"`             // host name; "" for every host
	Kind   string `json:"kind"`             // hang | fail | refuse | drop
	Match  string `json:"match,omitempty"`  // substring of the command line; "" matches every command
	Exit   int    `json:"exit,omitempty"`   // fail: exit status (default 1)
	Stdout string `json:"stdout,omitempty"` // fail: text on stdout
	Stderr string `json:"stderr,omitempty"` // fail: text on stderr
	Times  int    `json:"times,omitempty"`  // fires this many times, then disarms; 0 = until cleared
	Fired  int    `json:"fired"`
}

type faultSet struct {
	mu      sync.Mutex
	nextID  int
	faults  []*Fault
	release chan struct{} // closed (and replaced) when faults are cleared: wakes hanging commands
}

func newFaultSet() *faultSet {
	return &faultSet{nextID: 1, release: make(chan struct{})}
}

func validateFault(f Fault) error {
	switch f.Kind {
	case FaultHang, FaultFail, FaultRefuse, FaultDrop:
	default:
		return fmt.Errorf("unknown fault kind %q (hang, fail, refuse, drop)", f.Kind)
	}
	if f.Times < 0 {
		return fmt.Errorf("times must be >= 0")
	}
	return nil
}

func (fs *faultSet) add(f Fault) Fault {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if f.Kind == FaultFail && f.Exit == 0 {
		f.Exit = 1
	}
	f.ID = fs.nextID
	f.Fired = 0
	fs.nextID++
	fs.faults = append(fs.faults, &f)
	return f
}

// clear removes the faults of host ("" = all) and wakes hanging commands.
func (fs *faultSet) clear(host string) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	kept := fs.faults[:0]
	for _, f := range fs.faults {
		if host != "" && f.Host != host && f.Host != "" {
			kept = append(kept, f)
		}
	}
	fs.faults = kept
	close(fs.release)
	fs.release = make(chan struct{})
}

func (fs *faultSet) list() []Fault {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	out := make([]Fault, 0, len(fs.faults))
	for _, f := range fs.faults {
		out = append(out, *f)
	}
	return out
}

// refused reports whether host has an armed refuse fault.
func (fs *faultSet) refused(host string) bool {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for _, f := range fs.faults {
		if f.Kind == FaultRefuse && (f.Host == "" || f.Host == host) {
			return true
		}
	}
	return false
}

// take finds the first armed command fault (hang, fail, drop) that matches, counts it as fired and
// returns a copy plus the channel that closes when faults are cleared.
func (fs *faultSet) take(host, cmdline string) (*Fault, <-chan struct{}) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for i, f := range fs.faults {
		if f.Kind == FaultRefuse || (f.Host != "" && f.Host != host) || !strings.Contains(cmdline, f.Match) {
			continue
		}
		f.Fired++
		hit := *f
		if f.Times > 0 && f.Fired >= f.Times {
			fs.faults = append(fs.faults[:i], fs.faults[i+1:]...)
		}
		return &hit, fs.release
	}
	return nil, nil
}
