"""Cloud-scale planning aids: platform descriptions and a discrete-event simulator of exchanges."""
