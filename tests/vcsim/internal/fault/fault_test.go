package fault

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/vmware/govmomi/vim25/types"
)

// vimFault reports whether name is a vim fault type (one that implements BaseMethodFault).
func vimFault(name string) bool {
	t, ok := types.TypeFunc()(name)
	if !ok {
		return false
	}
	base := reflect.TypeOf((*types.BaseMethodFault)(nil)).Elem()
	return reflect.PointerTo(t).Implements(base)
}

// faultsBuilt lists where a Go file builds a vim fault itself: a types.<Fault>{...} literal or a
// simulator.Fault call.
func faultsBuilt(t *testing.T, fset *token.FileSet, path string) []string {
	f, err := parser.ParseFile(fset, path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		var sel *ast.SelectorExpr
		switch x := n.(type) {
		case *ast.CompositeLit:
			sel, _ = x.Type.(*ast.SelectorExpr)
		case *ast.CallExpr:
			if s, ok := x.Fun.(*ast.SelectorExpr); ok && s.Sel.Name == "Fault" {
				if id, ok := s.X.(*ast.Ident); ok && id.Name == "simulator" {
					out = append(out, fset.Position(x.Pos()).String()+": simulator.Fault")
				}
			}
		}
		if sel == nil {
			return true
		}
		if id, ok := sel.X.(*ast.Ident); ok && id.Name == "types" && vimFault(sel.Sel.Name) {
			out = append(out, fset.Position(sel.Pos()).String()+": types."+sel.Sel.Name)
		}
		return true
	})
	return out
}

// Every vim fault gpusim raises is built here: no other package of gpusim (govmomi's own vcsim command
// under cmd/ aside) writes a fault literal or calls simulator.Fault.
func TestOnlyThisPackageBuildsVimFaults(t *testing.T) {
	if !vimFault("InvalidState") || vimFault("VirtualMachineConfigSpec") {
		t.Fatal("vimFault does not tell faults from other vim types")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	here, _ := filepath.Abs(".")
	fset := token.NewFileSet()
	var found []string
	scanned := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (path == here || path == filepath.Join(root, "cmd") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		scanned++
		found = append(found, faultsBuilt(t, fset, path)...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if scanned < 20 {
		t.Fatalf("scanned only %d files under %s", scanned, root)
	}
	if len(found) > 0 {
		t.Errorf("vim faults built outside internal/fault (use or add a constructor there):\n%s", strings.Join(found, "\n"))
	}
}

// The test finds what it looks for.
func TestFaultsBuiltFindsLiteralsAndCalls(t *testing.T) {
	fset := token.NewFileSet()
	got := faultsBuilt(t, fset, "soap.go")
	var lits, calls int
	for _, g := range got {
		if strings.HasSuffix(g, "simulator.Fault") {
			calls++
		} else {
			lits++
		}
	}
	if lits == 0 || calls == 0 {
		t.Fatalf("soap.go builds faults, found: %v", got)
	}
}

// One table names a method's privilege for armed NoPermission faults and for privilege-limited users.
func TestMethodPrivilege(t *testing.T) {
	for _, c := range []struct{ method, objType, want string }{
		{"Destroy_Task", "Folder", "Folder.Delete"},
		{"Destroy_Task", "VirtualMachine", "VirtualMachine.Inventory.Delete"},
		{"fetchSoftwarePackages", "HostImageConfigManager", "Host.Config.Image"},
		{"RetrievePropertiesEx", "PropertyCollector", ""},
	} {
		if got := MethodPrivilege(c.method, c.objType); got != c.want {
			t.Errorf("MethodPrivilege(%s, %s) = %q, want %q", c.method, c.objType, got, c.want)
		}
	}
	if got := (Target{Method: "RetrievePropertiesEx"}).privilege(); got != "System.View" {
		t.Errorf("an armed NoPermission of a read names %q, want System.View", got)
	}
}
