package main

// bootCommand runs the commands that belong to the pod sandbox (`endo boot`); it reports false
// for an unknown command.
func bootCommand(cmd string, args []string) bool {
	return false
}
