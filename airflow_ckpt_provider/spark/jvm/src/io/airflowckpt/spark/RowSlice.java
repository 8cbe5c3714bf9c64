package io.airflowckpt.spark;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.catalyst.util.MapData;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.CalendarInterval;
import org.apache.spark.unsafe.types.GeographyVal;
import org.apache.spark.unsafe.types.GeometryVal;
import org.apache.spark.unsafe.types.UTF8String;
import org.apache.spark.unsafe.types.VariantVal;

/**
 * A read-only view of some fields of another row, without copying: field {@code i} of the view is
 * field {@code offset + i} of the row. One instance is reused for every row of a writer.
 */
final class RowSlice extends InternalRow {
  private static final long serialVersionUID = 1L;

  private final int offset;
  private final int size;
  private final DataType[] types;
  private InternalRow row;

  private RowSlice(int offset, int size, DataType[] types) {
    this.offset = offset;
    this.size = size;
    this.types = types;
  }

  /** The first {@code schema.length()} fields. */
  static RowSlice prefix(StructType schema) {
    DataType[] types = new DataType[schema.length()];
    for (int i = 0; i < types.length; i++) {
      types[i] = schema.fields()[i].dataType();
    }
    return new RowSlice(0, types.length, types);
  }

  /** Only field {@code ordinal}, as field 0. */
  static RowSlice single(int ordinal) {
    return new RowSlice(ordinal, 1, null);
  }

  RowSlice over(InternalRow base) {
    this.row = base;
    return this;
  }

  @Override
  public int numFields() {
    return size;
  }

  @Override
  public void setNullAt(int i) {
    throw new UnsupportedOperationException("read-only row view");
  }

  @Override
  public void update(int i, Object value) {
    throw new UnsupportedOperationException("read-only row view");
  }

  @Override
  public InternalRow copy() {
    if (types == null) {
      throw new UnsupportedOperationException("copy of a key view");
    }
    Object[] values = new Object[size];
    for (int i = 0; i < size; i++) {
      values[i] = row.isNullAt(offset + i) ? null : row.get(offset + i, types[i]);
    }
    return new GenericInternalRow(values).copy();
  }

  @Override
  public boolean isNullAt(int i) {
    return row.isNullAt(offset + i);
  }

  @Override
  public boolean getBoolean(int i) {
    return row.getBoolean(offset + i);
  }

  @Override
  public byte getByte(int i) {
    return row.getByte(offset + i);
  }

  @Override
  public short getShort(int i) {
    return row.getShort(offset + i);
  }

  @Override
  public int getInt(int i) {
    return row.getInt(offset + i);
  }

  @Override
  public long getLong(int i) {
    return row.getLong(offset + i);
  }

  @Override
  public float getFloat(int i) {
    return row.getFloat(offset + i);
  }

  @Override
  public double getDouble(int i) {
    return row.getDouble(offset + i);
  }

  @Override
  public Decimal getDecimal(int i, int precision, int scale) {
    return row.getDecimal(offset + i, precision, scale);
  }

  @Override
  public UTF8String getUTF8String(int i) {
    return row.getUTF8String(offset + i);
  }

  @Override
  public byte[] getBinary(int i) {
    return row.getBinary(offset + i);
  }

  @Override
  public GeographyVal getGeography(int i) {
    return row.getGeography(offset + i);
  }

  @Override
  public GeometryVal getGeometry(int i) {
    return row.getGeometry(offset + i);
  }

  @Override
  public CalendarInterval getInterval(int i) {
    return row.getInterval(offset + i);
  }

  @Override
  public VariantVal getVariant(int i) {
    return row.getVariant(offset + i);
  }

  @Override
  public InternalRow getStruct(int i, int numFields) {
    return row.getStruct(offset + i, numFields);
  }

  @Override
  public ArrayData getArray(int i) {
    return row.getArray(offset + i);
  }

  @Override
  public MapData getMap(int i) {
    return row.getMap(offset + i);
  }

  @Override
  public Object get(int i, DataType type) {
    return row.get(offset + i, type);
  }
}
