"""Robot samples: what a vision-language-action policy (PI0) reads besides its prompt and camera images
(robot state, noise, timestep); declared in ``modality.py``."""
