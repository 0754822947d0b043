"""Card-fraud detection showcase: the data generator and its ground truth."""
