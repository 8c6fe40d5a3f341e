#!/usr/bin/env python3
"""Reference for common/src/model/kmeans.rs: scikit-learn's Lloyd k-means on fixed points from
fixed initial centres. Prints what the Rust test pins (labels, iterations, centres, inertia).

    pip install scikit-learn && python3 tests/oracles/kmeans_reference.py
"""
import numpy as np
import sklearn
from sklearn.cluster import KMeans

points = np.array([[(i * 37) % 23, (i * 11) % 17, (i * 5) % 13] for i in range(40)], dtype=float)
for k, init_rows in [(3, [0, 5, 10]), (4, [1, 2, 3, 4])]:
    km = KMeans(n_clusters=k, init=points[init_rows], n_init=1, algorithm="lloyd",
                max_iter=300, tol=1e-4).fit(points)
    print(f"# scikit-learn {sklearn.__version__}, k = {k}, init rows {init_rows}")
    print("labels", km.labels_.tolist())
    print("iterations", km.n_iter_)
    print("centres", [[float(x) for x in c] for c in km.cluster_centers_])
    print("inertia", float(km.inertia_))
