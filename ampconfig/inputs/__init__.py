"""Model inputs a user gives or ampconfig generates: ``.npy``/``.npz`` arrays, data sets (folders of ``.npz``,
Polygraphy JSON), string ``.txt`` files, each read bounded and checked against the model's inputs, and seeded
generation for the rest. Beside documents/ (the settings a user writes): these are data."""
