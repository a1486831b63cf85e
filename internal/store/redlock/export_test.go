package redlock

// FirstMaster is the index of the master asked first for name.
func (s *Store) FirstMaster(name string) int { return s.first(name) }
