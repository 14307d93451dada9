"""The guest stack through Ansible: which guests (targets), their addresses (addresses), the ansible-runner
run with its artifacts and secrets handling (runner), and the live progress and summary (progress)."""
