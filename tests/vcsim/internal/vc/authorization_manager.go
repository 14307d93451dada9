package vc

import (
	"slices"
	"sort"

	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"
)

// AuthorizationManager: the privilege checks answered for the privilege-limited users (privileges.go).

// limitedAuth answers the privilege checks truthfully for a limited user's session; for other users
// (limited false) vcsim's AuthorizationManager answers (a call can reach another call's wrapper: calls.go).
type limitedAuth struct {
	*simulator.AuthorizationManager
	user    User
	limited bool
}

var authMethods = map[string]bool{
	"HasPrivilegeOnEntities": true, "HasPrivilegeOnEntity": true, "FetchUserPrivilegeOnEntities": true,
	"HasUserPrivilegeOnEntities": true,
}

// authFor is the wrapper that answers privilege checks for the users the request names: the limited user
// of the session (HasPrivilegeOnEntities asks about a session), or the user named in a user query.
func (s *Sim) authFor(ctx *simulator.Context, m *simulator.Method, o *simulator.AuthorizationManager) mo.Reference {
	name := ""
	switch req := m.Body.(type) {
	case *types.FetchUserPrivilegeOnEntities:
		name = req.UserName
	case *types.HasUserPrivilegeOnEntities:
		name = req.UserName
	default:
		if ctx.Session != nil {
			name = ctx.Session.UserName
		}
	}
	u, ok := s.users[name]
	return &limitedAuth{AuthorizationManager: o, user: u, limited: ok}
}

func (a *limitedAuth) availability(ids []string) []types.PrivilegeAvailability {
	out := make([]types.PrivilegeAvailability, 0, len(ids))
	for _, id := range ids {
		out = append(out, types.PrivilegeAvailability{PrivId: id, IsGranted: a.user.has(id)})
	}
	return out
}

// HasPrivilegeOnEntities answers per entity and privilege for the limited user.
func (a *limitedAuth) HasPrivilegeOnEntities(ctx *simulator.Context, req *types.HasPrivilegeOnEntities) soap.HasFault {
	if res, ok := redirected(ctx, a, "HasPrivilegeOnEntities", req); ok {
		return res
	}
	if !a.limited {
		return a.AuthorizationManager.HasPrivilegeOnEntities(req)
	}
	var out []types.EntityPrivilege
	for _, e := range req.Entity {
		out = append(out, types.EntityPrivilege{Entity: e, PrivAvailability: a.availability(req.PrivId)})
	}
	return &methods.HasPrivilegeOnEntitiesBody{Res: &types.HasPrivilegeOnEntitiesResponse{Returnval: out}}
}

// HasUserPrivilegeOnEntities answers for the named limited user.
func (a *limitedAuth) HasUserPrivilegeOnEntities(ctx *simulator.Context, req *types.HasUserPrivilegeOnEntities) soap.HasFault {
	if res, ok := redirected(ctx, a, "HasUserPrivilegeOnEntities", req); ok {
		return res
	}
	if !a.limited {
		return a.AuthorizationManager.HasUserPrivilegeOnEntities(req)
	}
	var out []types.EntityPrivilege
	for _, e := range req.Entities {
		out = append(out, types.EntityPrivilege{Entity: e, PrivAvailability: a.availability(req.PrivId)})
	}
	return &methods.HasUserPrivilegeOnEntitiesBody{Res: &types.HasUserPrivilegeOnEntitiesResponse{Returnval: out}}
}

// HasPrivilegeOnEntity answers for the limited user.
func (a *limitedAuth) HasPrivilegeOnEntity(ctx *simulator.Context, req *types.HasPrivilegeOnEntity) soap.HasFault {
	if res, ok := redirected(ctx, a, "HasPrivilegeOnEntity", req); ok {
		return res
	}
	if !a.limited {
		return a.AuthorizationManager.HasPrivilegeOnEntity(req)
	}
	out := make([]bool, len(req.PrivId))
	for i, id := range req.PrivId {
		out[i] = a.user.has(id)
	}
	return &methods.HasPrivilegeOnEntityBody{Res: &types.HasPrivilegeOnEntityResponse{Returnval: out}}
}

// FetchUserPrivilegeOnEntities lists the limited user's privileges on each entity.
func (a *limitedAuth) FetchUserPrivilegeOnEntities(ctx *simulator.Context, req *types.FetchUserPrivilegeOnEntities) soap.HasFault {
	if res, ok := redirected(ctx, a, "FetchUserPrivilegeOnEntities", req); ok {
		return res
	}
	if !a.limited {
		return a.AuthorizationManager.FetchUserPrivilegeOnEntities(req)
	}
	privs := append(slices.Clone(systemPrivileges), a.user.Privileges...)
	sort.Strings(privs)
	var out []types.UserPrivilegeResult
	for _, e := range req.Entities {
		out = append(out, types.UserPrivilegeResult{Entity: e, Privileges: privs})
	}
	return &methods.FetchUserPrivilegeOnEntitiesBody{Res: &types.FetchUserPrivilegeOnEntitiesResponse{Returnval: out}}
}
