"""epochtrain: iterator-style epoch trainers for deep reinforcement learning."""
