package fault

// MethodPrivileges: the privilege each method vgpuctl (or a test) calls requires, from the vSphere Web Services
// API reference ("Required Privileges"; pyVmomi's type info carries the same ids). Methods not listed need only
// System.Read or System.View. gpusim's one table: the privilege an armed NoPermission names, and the one a
// privilege-limited user must hold (internal/vc/privileges.go, which decides the methods whose privilege follows
// the request: ReconfigVM_Task, CloneVM_Task, RelocateVM_Task).
var MethodPrivileges = map[string]string{
	"PowerOnVM_Task": "VirtualMachine.Interact.PowerOn", "PowerOffVM_Task": "VirtualMachine.Interact.PowerOff",
	"ShutdownGuest": "VirtualMachine.Interact.PowerOff", "SuspendVM_Task": "VirtualMachine.Interact.Suspend",
	"ResetVM_Task":    "VirtualMachine.Interact.Reset",
	"ReconfigVM_Task": "VirtualMachine.Config.Settings", "CloneVM_Task": "VirtualMachine.Provisioning.Clone",
	"Destroy_Task":  "VirtualMachine.Inventory.Delete",
	"CreateVM_Task": "VirtualMachine.Inventory.Create", "UnregisterVM": "VirtualMachine.Inventory.Unregister",
	"EnterMaintenanceMode_Task": "Host.Config.Maintenance", "ExitMaintenanceMode_Task": "Host.Config.Maintenance",
	"RebootHost_Task":      "Host.Config.Maintenance",
	"UpdateGraphicsConfig": "Host.Config.Settings", "RefreshGraphicsManager": "Host.Config.Settings",
	"QueryModules": "Host.Config.Settings", "QueryConfiguredModuleOptionString": "Host.Config.Settings",
	"UpdateModuleOptionString": "Host.Config.Settings", "ChangeLockdownMode": "Host.Config.Settings",
	"StartService": "Host.Config.NetService", "StopService": "Host.Config.NetService",
	"RestartService": "Host.Config.NetService", "UpdateServicePolicy": "Host.Config.NetService",
	"RefreshServices":         "Host.Config.NetService",
	"FetchSoftwarePackages":   "Host.Config.Image",
	"fetchSoftwarePackages":   "Host.Config.Image", // its WSDL name starts lower case
	"QueryLockdownExceptions": "Global.Settings", "UpdateLockdownExceptions": "Global.Settings",
	"AddCustomFieldDef": "Global.ManageCustomFields", "RemoveCustomFieldDef": "Global.ManageCustomFields",
	"RenameCustomFieldDef": "Global.ManageCustomFields", "SetField": "Global.SetCustomField",
	"setCustomValue": "Global.SetCustomField", "CreateFolder": "Folder.Create",
}

// MethodPrivilege is the privilege a call of `method` on an object of type objType requires ("" when only
// System.Read or System.View): Destroy_Task of a folder is Folder.Delete, of a VM VirtualMachine.Inventory.Delete.
func MethodPrivilege(method, objType string) string {
	if method == "Destroy_Task" && objType == "Folder" {
		return "Folder.Delete"
	}
	return MethodPrivileges[method]
}
