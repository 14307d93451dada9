"""The documents vgpuctl prints: one dataclass per report (base.py: `Report`, `to_json`, errors), grouped by
command (plan, status, explain, guests); schemas.py generates their JSON Schemas into docs/schemas/."""
