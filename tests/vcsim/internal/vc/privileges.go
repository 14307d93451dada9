package vc

import (
	"crypto/subtle"
	"fmt"
	"slices"

	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"

	"gpusim/internal/fault"
)

// Privilege-limited users. govmomi's simulator grants every privilege to everyone (its AuthorizationManager
// answers true for any id); a farm file's `users` log in beside the main user and get only the privileges
// listed, enforced per method with the privilege the vSphere API reference requires for it (NoPermission
// naming the object and the privilege id, as vCenter answers), and answered truthfully by
// AuthorizationManager.HasPrivilegeOnEntities / HasPrivilegeOnEntity / FetchUserPrivilegeOnEntities
// (authorization_manager.go).
// System.Anonymous, System.View and System.Read are in every role and always granted.

// User is a farm file user: `users: [{name, password, privileges: [...]}]`.
type User struct {
	Name       string   `yaml:"name" json:"name"`
	Password   string   `yaml:"password" json:"password"`
	Privileges []string `yaml:"privileges" json:"privileges"`
}

// systemPrivileges are in every vCenter role.
var systemPrivileges = []string{"System.Anonymous", "System.View", "System.Read"}

func usersByName(users []User) map[string]User {
	out := map[string]User{}
	for _, u := range users {
		out[u.Name] = u
	}
	return out
}

// validateUsers checks the farm file's users (names unique, not the main user's).
func validateUsers(main string, users []User) error {
	seen := map[string]bool{main: true}
	for i, u := range users {
		if u.Name == "" {
			return fmt.Errorf("users[%d]: name is empty", i)
		}
		if seen[u.Name] {
			return fmt.Errorf("users[%d]: duplicate user %q", i, u.Name)
		}
		seen[u.Name] = true
	}
	return nil
}

// limitUsers lets the farm file's users log in beside the main user.
func (s *Sim) limitUsers() {
	if len(s.users) == 0 {
		return
	}
	s.ctx.Map.SessionManager().ValidLogin = func(req *types.Login) bool {
		if req.UserName == s.Spec.Username {
			return subtle.ConstantTimeCompare([]byte(req.Password), []byte(s.Spec.Password)) == 1
		}
		u, ok := s.users[req.UserName]
		return ok && subtle.ConstantTimeCompare([]byte(req.Password), []byte(u.Password)) == 1
	}
}

// limitedUser is the session's user when it is a privilege-limited one.
func (s *Sim) limitedUser(ctx *simulator.Context) (User, bool) {
	if ctx.Session == nil {
		return User{}, false
	}
	u, ok := s.users[ctx.Session.UserName]
	return u, ok
}

func (u User) has(priv string) bool {
	return slices.Contains(systemPrivileges, priv) || slices.Contains(u.Privileges, priv)
}

// denied is the NoPermission a limited user gets for a method it lacks a privilege for, else nil.
func (s *Sim) denied(ctx *simulator.Context, m *simulator.Method, obj mo.Reference) types.BaseMethodFault {
	u, ok := s.limitedUser(ctx)
	if !ok {
		return nil
	}
	for _, priv := range requiredPrivileges(m, obj) {
		if !u.has(priv) {
			ref := m.This
			return s.messages.With(fault.NoPermission(ref, priv), fmt.Sprintf("Permission to perform this operation was denied: %s on %s %s "+
				"(user %s)", priv, ref.Type, ref.Value, u.Name))
		}
	}
	return nil
}

// requiredPrivileges are the privileges a call needs, in the order vCenter checks them.
func requiredPrivileges(m *simulator.Method, obj mo.Reference) []string {
	switch m.Name {
	case "ReconfigVM_Task":
		if req, ok := m.Body.(*types.ReconfigVM_Task); ok {
			return reconfigPrivileges(req.Spec)
		}
	case "CloneVM_Task":
		privs := []string{"VirtualMachine.Provisioning.Clone"}
		if vm, ok := obj.(*simulator.VirtualMachine); ok && vm.Config != nil && vm.Config.Template {
			privs = append(privs, "VirtualMachine.Provisioning.DeployTemplate")
		}
		return append(privs, "VirtualMachine.Inventory.CreateFromExisting", "Resource.AssignVMToPool", "Datastore.AllocateSpace")
	case "Destroy_Task":
		if _, ok := obj.(*simulator.Folder); ok {
			return []string{"Folder.Delete"}
		}
		return []string{"VirtualMachine.Inventory.Delete"}
	case "RelocateVM_Task", "MigrateVM_Task":
		if vm, ok := obj.(*simulator.VirtualMachine); ok && vm.Runtime.PowerState == types.VirtualMachinePowerStatePoweredOn {
			return []string{"Resource.HotMigrate"}
		}
		return []string{"Resource.ColdMigrate"}
	}
	objType := ""
	if obj != nil {
		objType = obj.Reference().Type
	}
	if p := fault.MethodPrivilege(m.Name, objType); p != "" {
		return []string{p}
	}
	return nil
}

// reconfigPrivileges: ReconfigVM_Task's privileges follow what the spec changes.
func reconfigPrivileges(spec types.VirtualMachineConfigSpec) []string {
	var out []string
	add := func(cond bool, priv string) {
		if cond && !slices.Contains(out, priv) {
			out = append(out, priv)
		}
	}
	add(len(spec.DeviceChange) > 0, "VirtualMachine.Config.AddRemoveDevice")
	add(spec.NumCPUs != 0, "VirtualMachine.Config.CPUCount")
	add(spec.MemoryMB != 0, "VirtualMachine.Config.Memory")
	add(len(spec.ExtraConfig) > 0, "VirtualMachine.Config.AdvancedConfig")
	add(spec.MemoryReservationLockedToMax != nil || spec.MemoryAllocation != nil, "VirtualMachine.Config.Resource")
	add(spec.Firmware != "" || spec.Version != "", "VirtualMachine.Config.Settings")
	if len(out) == 0 {
		out = append(out, "VirtualMachine.Config.Settings")
	}
	return out
}
