package main

// Wiring of the VMs' guests (internal/guests): the -guests and -guest-hook flags, the hook's environment, the
// variables printed for people (the guests' root password, the key and known_hosts of the folder the hook
// prepared) and GET /gpusim/guests (?settled=1: once every power event so far has reached its guest).

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"gpusim/internal/guests"
	"gpusim/internal/vc"
)

// guestHookTimeout bounds one hook run: a guest's start waits for its SSH server.
const guestHookTimeout = 3 * time.Minute

// guestFlags are gpusim's options for the VMs' guests.
type guestFlags struct {
	dir, hook string
}

func addGuestFlags(fs *flag.FlagSet) *guestFlags {
	g := &guestFlags{}
	fs.StringVar(&g.dir, "guests", "", "give each VM a guest as it powers on, run by -guest-hook in this folder "+
		"(prepared by `guestctl.sh prepare`; vgpuctl sim up --guests does both)")
	fs.StringVar(&g.hook, "guest-hook", "", "the program that starts, stops and removes guests (scripts/guests/guestctl.sh)")
	return g
}

func (g *guestFlags) check() error {
	if (g.dir == "") != (g.hook == "") {
		return fmt.Errorf("-guests and -guest-hook go together")
	}
	if g.dir == "" {
		return nil
	}
	dir, err := filepath.Abs(g.dir)
	if err != nil {
		return err
	}
	g.dir = dir
	if _, err := os.Stat(filepath.Join(g.dir, "network")); err != nil {
		return fmt.Errorf("-guests %s: not a prepared folder (guestctl.sh prepare %s): %v", g.dir, g.dir, err)
	}
	return nil
}

// startGuests attaches the guests to the simulator's VMs; it returns the variables to print and the stop
// function, which removes every guest.
func startGuests(sim *vc.Sim, g *guestFlags, logf func(string, ...any)) ([][2]string, func(), error) {
	secret := make([]byte, 12)
	if _, err := rand.Read(secret); err != nil {
		return nil, nil, err
	}
	password := hex.EncodeToString(secret)
	hook := &guests.Script{Path: g.hook, Dir: g.dir, Env: []string{"VGPUCTL_GUEST_PASSWORD=" + password},
		Timeout: guestHookTimeout}
	m := guests.New(hook, sim.ReportGuest, logf)
	m.Watch(sim.Context().Map)
	sim.HandleControl("GET /gpusim/guests", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("settled") != "" {
			m.WaitIdle() // a power-on or -off answered before its guest started or stopped: wait for the hook
		}
		vc.WriteJSON(w, http.StatusOK, map[string]any{"guests": m.Guests()})
	})
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), guestHookTimeout)
		defer cancel()
		if err := m.Close(ctx); err != nil {
			logf("stopping the guests: %v", err)
		}
	}
	env := [][2]string{
		{"GPUSIM_GUEST_PASSWORD", password},
		{"GPUSIM_GUEST_KEY_FILE", filepath.Join(g.dir, "id_ed25519")},
		{"GPUSIM_GUEST_KNOWN_HOSTS", filepath.Join(g.dir, "known_hosts")},
	}
	return env, stop, nil
}
