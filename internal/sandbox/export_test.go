package sandbox

// SetRemoveImage replaces how m deletes a checkpoint's image directory (os.RemoveAll), for
// tests in package sandbox_test that make it block or fail.
func SetRemoveImage(m *Manager, fn func(dir string) error) { m.removeImage = fn }
